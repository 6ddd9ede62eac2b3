"""The trainer's side of the code sandbox, by job; ``reward_funcs.code.sandbox`` is the entry point."""
