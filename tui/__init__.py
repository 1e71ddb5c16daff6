"""kerntune user interfaces: the command line, the text renderer and the dashboard."""
