"""The ``bookiesim`` command line: the entry point (:mod:`bookiesim.cli.main`) and one module
per command. The top layer: nothing in the package imports it."""
