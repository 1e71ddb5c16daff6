"""kerntune engine: templates, spaces, evaluation, search and sessions. Imports nothing of the UI."""
