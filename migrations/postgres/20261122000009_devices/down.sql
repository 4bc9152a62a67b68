DROP TABLE devices;
