"""The Spark glue: ``write_stream`` over classic Spark and Spark Connect, the format, targets."""
