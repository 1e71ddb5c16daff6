"""kerntune agents: the planner, generator, tuner and tester roles, played by Claude (claude.py)
or by offline rules (rules.py, lift.py), behind the Provider protocol of engine/agent_api.py."""
