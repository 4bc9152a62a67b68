DROP INDEX flow_totals_folder_metric;
