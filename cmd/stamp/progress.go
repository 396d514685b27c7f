package main

import (
	"io"
	"sync"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// bars draws one progress bar per long step on a terminal.
type bars struct {
	mu sync.Mutex
	p  *mpb.Progress
}

func newBars(w io.Writer) *bars {
	return &bars{p: mpb.New(mpb.WithOutput(w), mpb.WithWidth(40), mpb.WithAutoRefresh())}
}

// start matches stamp.Progress.
func (b *bars) start(name string, total int64) (func(int64), func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if total <= 0 {
		total = 0
	}
	bar := b.p.AddBar(total,
		mpb.PrependDecorators(decor.Name(name, decor.WC{W: len(name) + 1, C: decor.DindentRight})),
		mpb.AppendDecorators(decor.CountersKibiByte("% .1f / % .1f"), decor.Name(" "), decor.AverageSpeed(decor.SizeB1024(0), "% .1f")),
		mpb.BarRemoveOnComplete(),
	)
	var once sync.Once
	return func(n int64) { bar.IncrInt64(n) }, func() {
		once.Do(func() {
			if total == 0 {
				bar.SetTotal(-1, true)
			} else {
				bar.SetTotal(-1, true)
			}
			bar.Wait()
		})
	}
}

func (b *bars) wait() { b.p.Wait() }
