"""The ``bookiesim`` command line: the entry point (:mod:`bookiesim.cli.main`, also run by
``python -m bookiesim``) and one module per command. The top layer: no other subpackage
imports it."""
