"""``serve``'s process model: front, supervisor, backend process, job control."""
