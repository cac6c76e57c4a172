"""The console: the call list, a call's page and the live observer feed (served by workers/console/)."""
