// Package freeport finds a free TCP port on the loopback interface, for the local servers that
// the worker set-up, the demo and the fault tests start (the Temporal dev server and its UI,
// fakepay, a throwaway Postgres).
package freeport

import "net"

// Get returns a port that was free on 127.0.0.1 a moment ago. Another process may take it
// before the caller binds it; callers start a server on it at once.
func Get() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
