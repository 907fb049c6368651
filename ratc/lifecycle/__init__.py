"""Training-state lifecycles: the life dialect, lowering a plan to per-stage life programs,
scheduling and checking them (ratc.lifecycle.compile.compile_program runs it all)."""
