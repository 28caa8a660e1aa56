package transport

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/edgefleet/fleet/internal/testkit"
)

func tcpPair(t *testing.T) (client, server net.Conn) { return testkit.TCPPair(t) }

// Bytes go both ways; an ended direction is passed on as EOF while the
// other still carries the answer.
func TestPipeCarriesBothWaysWithHalfClose(t *testing.T) {
	userA, pipeA := tcpPair(t)
	pipeB, userB := tcpPair(t)
	done := make(chan [2]int64, 1)
	go func() {
		a, b := Pipe(pipeA, pipeB, time.Minute, time.Minute)
		done <- [2]int64{a, b}
	}()
	_, _ = userA.Write([]byte("request"))
	_ = userA.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(userB)
	if string(got) != "request" {
		t.Fatalf("B read %q", got)
	}
	_, _ = userB.Write([]byte("answer"))
	_ = userB.(*net.TCPConn).CloseWrite()
	got, _ = io.ReadAll(userA)
	if string(got) != "answer" {
		t.Fatalf("A read %q", got)
	}
	if n := <-done; n != [2]int64{7, 6} {
		t.Fatalf("counted %v", n)
	}
}

// A tunnel nobody uses is closed after the idle time, and one left
// half-open after the half-close time.
func TestPipeClosesIdleAndHalfOpenTunnels(t *testing.T) {
	for _, tc := range []struct {
		name      string
		halfClose bool
	}{{"idle", false}, {"half-open", true}} {
		t.Run(tc.name, func(t *testing.T) {
			userA, pipeA := tcpPair(t)
			pipeB, _ := tcpPair(t)
			idle, half := time.Hour, time.Hour
			if tc.halfClose {
				half = 200 * time.Millisecond
				_ = userA.(*net.TCPConn).CloseWrite()
			} else {
				idle = 200 * time.Millisecond
			}
			done := make(chan struct{})
			go func() { Pipe(pipeA, pipeB, idle, half); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Pipe still running")
			}
			// Both ends were closed: A sees the end of the stream.
			_ = userA.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadAll(userA); err != nil {
				t.Fatalf("A: %v", err)
			}
		})
	}
}
