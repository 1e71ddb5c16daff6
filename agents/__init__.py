"""kerntune agents: planning, templating, tuning and testing roles."""
