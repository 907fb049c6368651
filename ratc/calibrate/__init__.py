"""`ratc calibrate`: measure this machine on microbenchmarks and write a host platform profile."""
