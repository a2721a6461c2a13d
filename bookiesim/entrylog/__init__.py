"""Entry log files: format, writer, reader, scanner, id allocation and log managers."""
