-- A folder's chart (docs/console.md, Insights) reads three metrics of its folder's totals over
-- a range of days: by this index it reads those rows alone, where flow_totals_folder reads
-- every metric of each day. `n` is not in it, so counting (an update of `n`) never changes it.
CREATE INDEX flow_totals_folder_metric ON flow_totals (environment_id, folder_id, mode, metric, day);
