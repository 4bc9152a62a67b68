-- Nothing to undo: the instants held in range are not restored.
SELECT 1;
