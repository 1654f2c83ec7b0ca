// The explorer's scenes: the scripted openings that half the histories begin with, each setting
// up what a guard of the state machine is for and leaving the rest to chance.

package engine

// staleAttempt sets up what the guards are for, and leaves the rest to chance: an attempt
// that reached the function is made stale by a fault (its lease ended by the clock, or its
// reservation lost in a crash), another attempt of the key (maybe for another request) runs
// some way, and the stale one wakes.
func (x *explorer) staleAttempt() (err error) {
	k := x.keys[x.rng.IntN(len(x.keys))]
	if err := x.start(k, 0); err != nil {
		return err
	}
	stale := x.attempt[len(x.attempt)-1]
	if err := x.runUntil(stale, 8, "heartbeat", "call"); err != nil {
		return err
	}
	switch x.rng.IntN(3) {
	case 0:
		if err := x.crash(); err != nil {
			return err
		}
	default:
		if err := x.endLease(k, x.rng.IntN(2) == 0); err != nil {
			return err
		}
	}
	payload := 0
	if x.rng.IntN(3) == 0 {
		payload = 1
	}
	if err := x.start(k, payload); err != nil {
		return err
	}
	fresh := x.attempt[len(x.attempt)-1]
	switch x.rng.IntN(3) {
	case 0:
		err = x.runUntil(fresh, 8, "call") // the fresh one in the function when the stale wakes
	case 1:
		err = x.runUntil(fresh, 12, "none") // the fresh one done
	default:
		err = x.runUntil(fresh, x.rng.IntN(8), "none")
	}
	if err != nil {
		return err
	}
	if err := x.runUntil(stale, 8, "none"); err != nil {
		return err
	}
	// A third attempt, while the fresh one may still be running.
	if err := x.start(k, 0); err != nil {
		return err
	}
	return x.runUntil(x.attempt[len(x.attempt)-1], 8, "none")
}

// revivedLease: an attempt's lease ends while it is in the function; another attempt reads the
// receipt and is about to take it over when the first heartbeats, extending its lease again.
func (x *explorer) revivedLease() error {
	k := x.keys[x.rng.IntN(len(x.keys))]
	if err := x.start(k, 0); err != nil {
		return err
	}
	first := x.attempt[len(x.attempt)-1]
	if err := x.runUntil(first, 8, "heartbeat"); err != nil {
		return err
	}
	if err := x.endLease(k, x.rng.IntN(2) == 0); err != nil {
		return err
	}
	if err := x.start(k, 0); err != nil {
		return err
	}
	second := x.attempt[len(x.attempt)-1]
	if err := x.runUntil(second, 8, "takeOver", "readTakeOver"); err != nil {
		return err
	}
	if e, ok := x.parked[first]; ok && e.point == "heartbeat" {
		if err := x.resume(first, heartbeatNow); err != nil {
			return err
		}
		if err := x.runUntil(first, 1, "call"); err != nil {
			return err
		}
	}
	return x.runUntil(second, 8, "none")
}

// releaseWhileRead: a downstream that does not deduplicate, asked by reconciling. An attempt
// paused past its lease wakes and sends its request, which the downstream holds, and releases
// the receipt, just after another attempt read it and decided that the settle time had passed.
func (x *explorer) releaseWhileRead() error {
	k := x.keys[x.rng.IntN(len(x.keys))]
	k.dedup, k.reconcile = false, true
	if err := x.start(k, 0); err != nil {
		return err
	}
	first := x.attempt[len(x.attempt)-1]
	if err := x.runUntil(first, 8, "call"); err != nil {
		return err
	}
	if err := x.endLease(k, true); err != nil {
		return err
	}
	if err := x.start(k, 0); err != nil {
		return err
	}
	second := x.attempt[len(x.attempt)-1]
	if err := x.runUntil(second, 8, "takeOver", "readTakeOver"); err != nil {
		return err
	}
	if e, ok := x.parked[first]; ok && e.point == "call" {
		if err := x.resume(first, callInFlight); err != nil {
			return err
		}
		if err := x.runUntil(first, 4, "none"); err != nil {
			return err
		}
	}
	return x.runUntil(second, 12, "none")
}

// lostReservation: a deduplicating downstream, so reservations commit asynchronously. An
// attempt reaches its call and Postgres crashes, losing its reservation; an attempt for another
// request of the key reserves afresh and may finish; the first wakes and completes, releases or
// heartbeats with the reservation it holds. It must neither write over the new receipt nor
// answer with the other request's result.
func (x *explorer) lostReservation() error {
	k := x.keys[x.rng.IntN(len(x.keys))]
	k.dedup = true
	if err := x.start(k, 0); err != nil {
		return err
	}
	stale := x.attempt[len(x.attempt)-1]
	if err := x.runUntil(stale, 8, "heartbeat", "call"); err != nil {
		return err
	}
	if err := x.crash(); err != nil {
		return err
	}
	if err := x.start(k, 1); err != nil {
		return err
	}
	if err := x.runUntil(x.attempt[len(x.attempt)-1], 4+x.rng.IntN(12), "none"); err != nil {
		return err
	}
	return x.runUntil(stale, 12, "none")
}

// crashAfterEffect: an attempt's call reaches the downstream and its worker dies before the
// outcome is recorded; later attempts take over, some fail before sending, time passes.
func (x *explorer) crashAfterEffect() error {
	k := x.keys[x.rng.IntN(len(x.keys))]
	if err := x.start(k, 0); err != nil {
		return err
	}
	a := x.attempt[len(x.attempt)-1]
	if err := x.runUntil(a, 8, "call"); err != nil {
		return err
	}
	if _, ok := x.parked[a]; ok {
		if err := x.resume(a, []action{callOK, callLost}[x.rng.IntN(2)]); err != nil {
			return err
		}
		if _, ok := x.parked[a]; ok { // at its completion or release: the worker dies
			if err := x.resume(a, backendGone); err != nil {
				return err
			}
		}
	}
	for range 1 + x.rng.IntN(3) {
		if err := x.endLease(k, x.rng.IntN(3) > 0); err != nil {
			return err
		}
		if x.rng.IntN(2) == 0 {
			if err := x.forget(k); err != nil {
				return err
			}
		}
		if err := x.start(k, 0); err != nil {
			return err
		}
		b := x.attempt[len(x.attempt)-1]
		if err := x.runUntil(b, 12, "call"); err != nil {
			return err
		}
		if _, ok := x.parked[b]; ok && x.rng.IntN(2) == 0 {
			// Its request is never sent: that must not erase what the first may have done.
			if err := x.resume(b, callNotSent); err != nil {
				return err
			}
		}
		if err := x.runUntil(b, 12, "none"); err != nil {
			return err
		}
	}
	return nil
}
