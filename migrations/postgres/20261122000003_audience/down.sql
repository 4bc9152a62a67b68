DROP TABLE streams;
DROP TABLE segments;
DROP TABLE end_user_tags;
DROP TABLE end_users;
