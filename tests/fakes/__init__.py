"""Local fakes for tests: :mod:`tests.fakes.http` is a fake HTTP server (real sockets on
127.0.0.1, fresh port per server) that provider and metadata-service fakes build on."""
