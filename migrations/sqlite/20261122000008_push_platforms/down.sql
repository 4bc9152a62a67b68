DROP TABLE push_platforms;
