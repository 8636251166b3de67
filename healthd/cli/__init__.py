"""The command line: dispatch without heavy imports, the argparse parser, the results table and JSON document."""
