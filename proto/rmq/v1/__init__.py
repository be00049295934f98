"""Generated stubs for rmq/v1/rmq.proto; regenerate with `make proto`, never edit by hand."""
