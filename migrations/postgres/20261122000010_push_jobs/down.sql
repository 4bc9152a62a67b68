DROP TABLE push_jobs;
