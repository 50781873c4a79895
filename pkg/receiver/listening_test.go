package receiver

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// A receiver is not ready until it listens; one whose address is taken
// says so and never becomes ready, so that a controller is not called
// ready a moment before it exits.
func TestReadyOnlyOnceListening(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	s := New(nil, nil, NewMetrics("test", "run", "test"), Options{Addr: taken.Addr().String()})
	if s.Listening(nil) == nil {
		t.Fatal("ready before Start")
	}
	if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start on a taken address: %v", err)
	}
	if s.Listening(nil) == nil {
		t.Error("ready although it could not listen")
	}

	free := New(nil, nil, NewMetrics("test2", "run", "test"), Options{Addr: "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- free.Start(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for free.Listening(nil) != nil {
		if time.Now().After(deadline) {
			t.Fatal("not ready 5 s after Start on a free address")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
}
