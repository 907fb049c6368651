"""`python -m ratc`: the `ratc` command (the same entry point as the console script)."""

from ratc.cli.main import run

if __name__ == "__main__":
    run()
