"""Privacy: redaction of personal data before anything is written, and the agents' storage tiers."""
