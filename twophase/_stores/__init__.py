"""Where the coordinator log lives: the store interface and its local, S3, GCS, Azure backends."""
