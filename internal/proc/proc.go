// Package proc is the process plumbing that the demo and the fault tests share: build a command
// into a binary, start it, wait until it listens, and stop it politely (SIGTERM) or as a crash
// does (SIGKILL).
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/tempotent/tempotent/internal/freeport"
)

// Packages that the demo and the fault tests run as processes of their own.
const (
	SampleWorker = "github.com/tempotent/tempotent/samples/payment/cmd/worker"
	Fakepay      = "github.com/tempotent/tempotent/downstream/fakepay/cmd/fakepay"
)

// Build compiles pkg into the binary out, with the build tags given, so that a kill hits the
// program itself rather than `go run`.
func Build(ctx context.Context, out, pkg string, tags ...string) error {
	args := []string{"build", "-o", out}
	for _, t := range tags {
		args = append(args, "-tags", t)
	}
	if msg, err := exec.CommandContext(ctx, "go", append(args, pkg)...).CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v: %s", pkg, err, msg)
	}
	return nil
}

// Process is a started command.
type Process struct {
	Cmd    *exec.Cmd
	once   sync.Once     // the signal of Kill or Stop
	watch  sync.Once     // starts the goroutine that waits for the process
	exited chan struct{} // closed when Cmd.Wait has returned
	err    error         // Cmd.Wait's result
}

// Start starts cmd, leashed to this process: on Linux the kernel kills it when this process
// dies, even by SIGKILL or a test's -timeout, which run no cleanup. Once Wait, Exited, Kill or
// Stop is called, the Process waits for cmd: do not call Cmd.Wait as well.
func Start(cmd *exec.Cmd) (*Process, error) {
	leash(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return &Process{Cmd: cmd}, nil
}

// waiting starts, once, the goroutine that waits for the process.
func (p *Process) waiting() {
	p.watch.Do(func() {
		p.exited = make(chan struct{})
		go func() {
			p.err = p.Cmd.Wait()
			close(p.exited)
		}()
	})
}

// Exited is closed once the process has ended, whatever ended it.
func (p *Process) Exited() <-chan struct{} {
	p.waiting()
	return p.exited
}

// Wait waits for the process to end and returns what exec.Cmd.Wait returned.
func (p *Process) Wait() error {
	<-p.Exited()
	return p.err
}

// Kill sends SIGKILL, as a crash: the process gets no chance to finish or record anything. It
// waits for the process to end, and does nothing after the first Kill or Stop.
func (p *Process) Kill() { p.end(syscall.SIGKILL) }

// Stop sends SIGTERM and waits for the process to shut down.
func (p *Process) Stop() { p.end(syscall.SIGTERM) }

func (p *Process) end(sig syscall.Signal) {
	p.once.Do(func() {
		_ = p.Cmd.Process.Signal(sig)
		<-p.Exited()
	})
}

// Signal sends sig (SIGSTOP and SIGCONT pause and resume it).
func (p *Process) Signal(sig syscall.Signal) error { return p.Cmd.Process.Signal(sig) }

// WaitListening waits until something accepts TCP connections on addr, or ctx ends.
func WaitListening(ctx context.Context, addr string) error {
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return conn.Close()
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Server is a process that serves HTTP at URL.
type Server struct {
	*Process
	URL string
}

// StartFakepay runs the fakepay binary bin on a free port, its ledger kept in state, its output
// written to out, with extra flags, and waits up to timeout for it to listen.
func StartFakepay(bin, state string, out io.Writer, timeout time.Duration, extra ...string) (*Server, error) {
	port, err := freeport.Get()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, append([]string{"-addr", addr, "-state", state}, extra...)...)
	cmd.Stdout, cmd.Stderr = out, out
	p, err := Start(cmd)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := WaitListening(ctx, addr); err != nil {
		p.Kill()
		return nil, fmt.Errorf("fakepay did not start on %s: %w", addr, err)
	}
	return &Server{Process: p, URL: "http://" + addr}, nil
}
