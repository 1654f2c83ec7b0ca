package downstream

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The reference model of one host's circuit, written as the states the documentation names:
// closed, open until a time, half-open once that time has passed.
type modelState int

const (
	mClosed modelState = iota
	mOpen
	mHalfOpen
)

type modelHost struct {
	state    modelState
	failures int
	until    time.Time
	openFor  time.Duration
	probes   int // in flight
	epoch    int // changes on every open and close
}

// modelRequest is a request let through, by both the breaker and the model.
type modelRequest struct {
	host  string
	pass  ticket
	epoch int
	probe bool
}

type model struct {
	cfg   BreakerConfig
	hosts map[string]*modelHost
}

func (m *model) host(h string, now time.Time) *modelHost {
	mh := m.hosts[h]
	if mh == nil {
		mh = &modelHost{}
		m.hosts[h] = mh
	}
	if mh.state == mOpen && !now.Before(mh.until) {
		mh.state = mHalfOpen
	}
	return mh
}

// admit is the model's decision: let through (as a probe or not), or refuse until retryAt.
func (m *model) admit(h string, now time.Time) (ok, probe bool, retryAt time.Time) {
	mh := m.host(h, now)
	switch mh.state {
	case mClosed:
		return true, false, time.Time{}
	case mOpen:
		return false, false, mh.until
	}
	if mh.probes == m.cfg.Probes {
		return false, false, now.Add(m.cfg.Open)
	}
	mh.probes++
	return true, true, time.Time{}
}

func (m *model) open(mh *modelHost, d time.Duration, now time.Time) {
	*mh = modelHost{state: mOpen, until: now.Add(d), openFor: d, epoch: mh.epoch + 1}
}

func (m *model) done(r modelRequest, o outcome, now time.Time) {
	mh := m.host(r.host, now)
	if r.epoch != mh.epoch {
		return // sent under an earlier state: says nothing of this one
	}
	switch {
	case mh.state == mClosed && o == healthy:
		mh.failures = 0
	case mh.state == mClosed && o == failed:
		mh.failures++
		if mh.failures == m.cfg.Failures {
			m.open(mh, m.cfg.Open, now)
		}
	case mh.state == mHalfOpen && o == neutral:
		mh.probes--
	case mh.state == mHalfOpen && o == healthy:
		*mh = modelHost{epoch: mh.epoch + 1}
	case mh.state == mHalfOpen && o == failed:
		m.open(mh, min(2*mh.openFor, m.cfg.OpenMax), now)
	}
}

// explored counts what the explorer saw, so that a run that never reached a state fails.
type explored struct {
	opened, refusedOpen, probes, refusedBusy, closedByProbe, reopened, stale int
}

// TestBreakerExplore drives one breaker and the reference model with the same random requests,
// answers and clock moves across three hosts, and requires the same decision for every request:
// let through, let through as a probe, or refused with the same RetryAt. So the breaker never
// lets a request through an open circuit, lets at most Probes through a half-open one, closes on
// a successful probe, opens again on a failed one for twice as long (up to OpenMax), ignores
// answers to requests sent before its circuit changed, and keeps each host's circuit apart.
func TestBreakerExplore(t *testing.T) {
	t.Parallel()
	var seen explored
	for seed := uint64(1); seed <= 400; seed++ {
		exploreBreaker(t, seed, &seen)
	}
	t.Logf("explored: %+v", seen)
	require.Positive(t, seen.opened, "no circuit opened")
	require.Positive(t, seen.refusedOpen, "no request refused by an open circuit")
	require.Positive(t, seen.probes, "no probe let through")
	require.Positive(t, seen.refusedBusy, "no request refused while the probes were in flight")
	require.Positive(t, seen.closedByProbe, "no circuit closed by a probe")
	require.Positive(t, seen.reopened, "no circuit opened again by a failed probe")
	require.Positive(t, seen.stale, "no answer arrived after its circuit changed")
}

func exploreBreaker(t *testing.T, seed uint64, seen *explored) {
	rng := rand.New(rand.NewPCG(seed, 40))
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	open := time.Duration(1+rng.IntN(5)) * time.Second
	cfg := BreakerConfig{
		Failures: 1 + rng.IntN(4), Open: open, OpenMax: open * time.Duration(1+rng.IntN(6)),
		Probes: 1 + rng.IntN(3), Now: func() time.Time { return now },
	}
	b := &breaker{cfg: cfg.WithDefaults()}
	m := &model{cfg: b.cfg, hosts: map[string]*modelHost{}}
	hosts := []string{"a:1", "b:2", "c:3"}
	health := map[string]float64{"a:1": 0.1, "b:2": 0.5, "c:3": 0.9} // chance of a healthy answer
	var inflight []modelRequest
	var trace strings.Builder
	fail := func(format string, args ...any) {
		t.Fatalf("seed %d (config %+v): %s\ntrace:\n%s", seed, cfg, fmt.Sprintf(format, args...), trace.String())
	}
	for step := range 300 {
		switch op := rng.IntN(10); {
		case op < 4: // a request
			h := hosts[rng.IntN(len(hosts))]
			ok, probe, retryAt := m.admit(h, now)
			pass, err := b.admit(h)
			fmt.Fprintf(&trace, "%d: %v request %s: model ok=%v probe=%v retryAt=%v; breaker %+v %v\n", step, now.Format("15:04:05"), h, ok, probe, retryAt.Format("15:04:05"), pass, err)
			if !ok {
				open, isOpen := err.(*CircuitOpenError)
				if !isOpen || open.Host != h || !open.RetryAt.Equal(retryAt) {
					fail("request to %s: want refused until %v, got %+v, %v", h, retryAt, pass, err)
				}
				if m.hosts[h].state == mOpen {
					seen.refusedOpen++
				} else {
					seen.refusedBusy++
				}
				continue
			}
			if err != nil || pass.probe != probe || pass.host != h {
				fail("request to %s: want let through (probe %v), got %+v, %v", h, probe, pass, err)
			}
			if probe {
				seen.probes++
			}
			inflight = append(inflight, modelRequest{host: h, pass: pass, epoch: m.hosts[h].epoch, probe: probe})
		case op < 8 && len(inflight) > 0: // an answer
			i := rng.IntN(len(inflight))
			r := inflight[i]
			inflight = append(inflight[:i], inflight[i+1:]...)
			o := failed
			switch x := rng.Float64(); {
			case x < 0.1:
				o = neutral
			case x < 0.1+0.9*health[r.host]:
				o = healthy
			}
			mh := m.host(r.host, now)
			before, epoch := mh.state, mh.epoch
			if r.epoch != epoch {
				seen.stale++
			}
			m.done(r, o, now)
			b.done(r.pass, o)
			after := m.hosts[r.host].state
			switch {
			case before == mClosed && after == mOpen:
				seen.opened++
			case before == mHalfOpen && after == mClosed:
				seen.closedByProbe++
			case before == mHalfOpen && after == mOpen:
				seen.reopened++
			}
			fmt.Fprintf(&trace, "%d: %v answer %d to %+v: %v -> %v\n", step, now.Format("15:04:05"), o, r.pass, before, after)
		default: // time passes
			now = now.Add(time.Duration(rng.Int64N(int64(cfg.OpenMax + time.Second))))
			fmt.Fprintf(&trace, "%d: clock to %v\n", step, now.Format("15:04:05"))
		}
		for _, h := range hosts {
			mh := m.host(h, now)
			c := b.hosts[h]
			if c == nil {
				if mh.state != mClosed || mh.failures != 0 {
					fail("host %s: breaker has no circuit, model %+v", h, *mh)
				}
				continue
			}
			if c.open != (mh.state != mClosed) || c.failures != mh.failures || (mh.state == mHalfOpen && c.probes != mh.probes) {
				fail("host %s: breaker %+v, model %+v", h, *c, *mh)
			}
		}
	}
}
