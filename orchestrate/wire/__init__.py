"""The wire layer: each protocol's bytes framed and parsed ONCE into typed wire events, which the
peers (the two-way part) and the normalizers (the entries) both consume, live and in replay."""
