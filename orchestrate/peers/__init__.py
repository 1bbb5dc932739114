"""Two-way protocol peers: correlate ids and answer every request the agent makes. Sans-I/O."""
