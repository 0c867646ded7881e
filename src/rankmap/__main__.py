from rankmap.cli import entry

entry()
