package stamp

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// turnsProbe runs takeTurns in the background with writes that start when
// called and return when the test says.
type turnsProbe struct {
	mu      sync.Mutex
	started []int
	startCh chan int
	finish  []chan error
	errs    []error
	done    chan struct{}
}

func probeTurns(t *testing.T, at int, from []int) *turnsProbe {
	t.Helper()
	p := &turnsProbe{startCh: make(chan int, len(from)), errs: make([]error, len(from)), done: make(chan struct{})}
	for range from {
		p.finish = append(p.finish, make(chan error))
	}
	go func() {
		defer close(p.done)
		takeTurns(context.Background(), at, from, p.errs, func(i int) error {
			p.mu.Lock()
			p.started = append(p.started, i)
			p.mu.Unlock()
			p.startCh <- i
			return <-p.finish[i]
		})
	}()
	return p
}

// next waits for the next write to start and says which.
func (p *turnsProbe) next(t *testing.T) int {
	t.Helper()
	select {
	case i := <-p.startCh:
		return i
	case <-time.After(10 * time.Second):
		p.mu.Lock()
		defer p.mu.Unlock()
		t.Fatalf("no output started after %v", p.started)
		return -1
	}
}

// TestTakeTurnsHandsTheTurnOver: with two turns and the outputs raw,
// qcow2 from raw, and two others, raw and the first other start; when raw
// is done, qcow2 takes its turn, not the output after it in the recipe,
// which starts only when a turn is free again.
func TestTakeTurnsHandsTheTurnOver(t *testing.T) {
	p := probeTurns(t, 2, []int{-1, 0, -1, -1})
	first := []int{p.next(t), p.next(t)}
	slices.Sort(first)
	if !slices.Equal(first, []int{0, 2}) {
		t.Fatalf("first to start: %v, want raw (0) and the first other (2)", first)
	}
	p.finish[0] <- nil
	if i := p.next(t); i != 1 {
		t.Fatalf("after raw, output %d started, want qcow2 (1)", i)
	}
	p.finish[1] <- nil
	if i := p.next(t); i != 3 {
		t.Fatalf("after qcow2, output %d started, want 3", i)
	}
	p.finish[2] <- nil
	p.finish[3] <- nil
	<-p.done
	for i, err := range p.errs {
		if err != nil {
			t.Errorf("output %d: %v", i, err)
		}
	}
}

// TestTakeTurnsAfterAFailure: an output whose source failed is skipped,
// and the failed source's turn goes back, so the outputs after it still
// run; only the first output made from another inherits its turn.
func TestTakeTurnsAfterAFailure(t *testing.T) {
	p := probeTurns(t, 1, []int{-1, 0, 0, -1})
	if i := p.next(t); i != 0 {
		t.Fatalf("output %d started first, want 0", i)
	}
	p.finish[0] <- errors.New("raw failed")
	if i := p.next(t); i != 3 {
		t.Fatalf("output %d started after the failure, want 3", i)
	}
	p.finish[3] <- nil
	<-p.done
	if !errors.Is(p.errs[1], errOutputSkipped) || !errors.Is(p.errs[2], errOutputSkipped) || p.errs[3] != nil {
		t.Errorf("errors %v, want the two made from 0 skipped and 3 written", p.errs)
	}

	// With one turn, the second output made from the source waits for the
	// first to give its turn back.
	p = probeTurns(t, 1, []int{-1, 0, 0})
	for _, want := range []int{0, 1, 2} {
		if i := p.next(t); i != want {
			t.Fatalf("output %d started, want %d", i, want)
		}
		p.finish[want] <- nil
	}
	<-p.done
}
