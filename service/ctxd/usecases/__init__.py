"""The use cases: every operation a transport performs, and the recovery an agent asks for."""
