"""The training step's model: the plan a program is compiled for and the rules of its step."""
