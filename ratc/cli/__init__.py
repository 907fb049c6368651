"""The `ratc` command line: one module per subcommand."""
