package redisserver

import "testing"

// TestServer is a Server owned by a test: its controls fail the test instead of returning an
// error, and it is closed when the test ends.
type TestServer struct {
	*Server
	t testing.TB
}

// StartTest starts a server as Start does, failing t if it cannot, and closes it when t ends.
func StartTest(t testing.TB, opts ...Option) *TestServer {
	t.Helper()
	s, err := Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return &TestServer{Server: s, t: t}
}

// Stop is Server.Stop, failing the test on an error.
func (s *TestServer) Stop() { s.t.Helper(); s.check(s.Server.Stop()) }

// Kill is Server.Kill, failing the test on an error.
func (s *TestServer) Kill() { s.t.Helper(); s.check(s.Server.Kill()) }

// Pause is Server.Pause, failing the test on an error.
func (s *TestServer) Pause() { s.t.Helper(); s.check(s.Server.Pause()) }

// Resume is Server.Resume, failing the test on an error.
func (s *TestServer) Resume() { s.t.Helper(); s.check(s.Server.Resume()) }

// Restart is Server.Restart, failing the test on an error.
func (s *TestServer) Restart() { s.t.Helper(); s.check(s.Server.Restart()) }

func (s *TestServer) check(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
}
