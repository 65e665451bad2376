"""The PostgreSQL dialect of the JDBC family (psycopg2, ``PREPARE TRANSACTION``, ``COPY``)."""
