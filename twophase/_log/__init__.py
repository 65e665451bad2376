"""The coordinator log and its durable formats: records, handle codec, legacy reader, identity."""
