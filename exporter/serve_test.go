package exporter

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

func TestListenerServesAtMostMaxConnectionsAtOnce(t *testing.T) {
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var accepted atomic.Int32
	conns := make(chan net.Conn, 2*MaxConnections)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conns <- c
		}
	}()
	for range 2 * MaxConnections {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	time.Sleep(200 * time.Millisecond)
	if n := accepted.Load(); n != MaxConnections {
		t.Fatalf("%d connections accepted at once, want %d", n, MaxConnections)
	}
	(<-conns).Close()
	deadline := time.Now().Add(5 * time.Second)
	for accepted.Load() != MaxConnections+1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := accepted.Load(); n != MaxConnections+1 {
		t.Fatalf("%d accepted after one closed, want %d", n, MaxConnections+1)
	}
}
