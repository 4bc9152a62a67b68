DROP TABLE editor_texts;
