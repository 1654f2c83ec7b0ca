// Failed sign-ins: a client address that keeps guessing is held off.

package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// SignInLimit bounds the failed sign-ins of one client address, as a token bucket: Burst
// failures at once, then one more per Every. A request that carries credentials from an address
// past its limit is answered 429 with Retry-After, and its credentials are not checked, so that
// a guess cannot succeed while the address is held off.
//
// The address is the connection's (IPv6 by its /64): proxy headers are not trusted, since the
// client writes them. Behind a reverse proxy every client has the proxy's address and shares
// one limit; limit sign-ins at the proxy then, or mount the console where the proxy passes the
// connection through.
//
// The limiter remembers a bounded number of addresses. While all it remembers are short of
// tries, a new address shares a bucket with the other new addresses that sign in as the same
// name (one of 4096 buckets, chosen by a keyed hash of the name): a guesser spread over many
// addresses holds off new addresses for the names he guesses, and the few that share their
// buckets, not for everyone; and the buckets say nothing of which names are users'.
type SignInLimit struct {
	// Burst is how many failed sign-ins an address may make in a row. Default
	// SignInBurstDefault; negative turns the limit off.
	Burst int
	// Every is how often an address that used its burst gets one more try. Default
	// SignInEveryDefault.
	Every time.Duration
}

// Defaults of SignInLimit.
const (
	SignInBurstDefault = 10
	SignInEveryDefault = 6 * time.Second
)

// signInAddressesMax bounds how many addresses the limiter remembers: when they are all taken
// by addresses still short of tries, any other address fails into a spill bucket chosen by the
// name it signs in as, and while that bucket is empty, an address the limiter does not remember
// is held off when it signs in as a name of that bucket. A guesser who keeps the limiter full
// from many addresses can so lock out, from new addresses, the names he guesses (and those that
// share their buckets), not everyone.
var signInAddressesMax = 10_000

// signInSpillBuckets is how many spill buckets the limiter has. A name's bucket is a keyed hash
// of the name (the console's Secret), the same for a user's name as for any other: which bucket
// holds a request off says nothing of whether its name is a user's.
var signInSpillBuckets = 4096

// signIns is the limiter of failed sign-ins, by client address.
type signIns struct {
	limit SignInLimit
	now   func() time.Time

	mu      sync.Mutex
	buckets map[netip.Prefix]*bucket
	swept   time.Time // the last forgetRefilled
	// spill is the buckets of the addresses not remembered while buckets is full, by a keyed
	// hash of the name signed in as (spillOf), keyed by key (the console's Secret).
	spill []bucket
	key   []byte
}

// bucket is one address's tokens, as of last.
type bucket struct {
	tokens float64
	last   time.Time
}

// unparsed is the limiter's key for every remote address it cannot parse.
var unparsed = netip.Prefix{}

// newSignIns returns a limiter whose spill buckets are chosen by a hash keyed by key.
func newSignIns(limit SignInLimit, key []byte) *signIns {
	s := &signIns{limit: limit, now: time.Now, buckets: map[netip.Prefix]*bucket{}, spill: make([]bucket, signInSpillBuckets), key: key}
	for i := range s.spill {
		s.spill[i].tokens = float64(limit.Burst)
	}
	return s
}

// clientOf is the limiter's key for a request's remote address.
func clientOf(remoteAddr string) netip.Prefix {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return unparsed
	}
	a = a.Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// refill brings b's tokens to now.
func (s *signIns) refill(b *bucket, now time.Time) {
	b.tokens = min(float64(s.limit.Burst), b.tokens+float64(now.Sub(b.last))/float64(s.limit.Every))
	b.last = now
}

// heldOff reports whether client, signing in as name, has no try left, and when it gets the
// next.
func (s *signIns) heldOff(client netip.Prefix, name string) (time.Duration, bool) {
	if s.limit.Burst < 0 {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buckets[client]
	if b == nil {
		// An address not remembered spills only while every place is taken; until then it has
		// tries of its own, so a guesser who fills the limiter from many addresses and then
		// leaves locks out nobody.
		if len(s.buckets) < signInAddressesMax {
			return 0, false
		}
		b = s.spillOf(name)
	}
	now := s.now()
	s.refill(b, now)
	if b.tokens >= 1 {
		return 0, false
	}
	return time.Duration((1 - b.tokens) * float64(s.limit.Every)), true
}

// failed takes one try from client, which signed in as name.
func (s *signIns) failed(client netip.Prefix, name string) {
	if s.limit.Burst < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	b := s.buckets[client]
	if b == nil {
		if len(s.buckets) >= signInAddressesMax && now.Sub(s.swept) >= s.limit.Every {
			// At most once per Every: a sweep reads every bucket under the lock, and a guesser
			// with many addresses must not make each of his failures pay for one.
			s.swept = now
			s.forgetRefilled(now)
		}
		if len(s.buckets) >= signInAddressesMax {
			b = s.spillOf(name)
		} else {
			b = &bucket{tokens: float64(s.limit.Burst), last: now}
			s.buckets[client] = b
		}
	}
	s.refill(b, now)
	b.tokens--
}

// spillOf is the spill bucket of a sign-in as name, hashed only once the limiter is full: a
// hash of the name keyed by the console's Secret, so that a guesser can neither aim at a user's
// bucket without knowing the name, nor tell a user's name from another by the bucket it falls
// into.
func (s *signIns) spillOf(name string) *bucket {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("tempotent console sign-in spill\x00"))
	m.Write([]byte(name))
	return &s.spill[binary.BigEndian.Uint64(m.Sum(nil))%uint64(len(s.spill))]
}

// forgetRefilled drops the buckets that are full again: their addresses are as if never seen.
func (s *signIns) forgetRefilled(now time.Time) {
	for k, b := range s.buckets {
		if s.refill(b, now); b.tokens >= float64(s.limit.Burst) {
			delete(s.buckets, k)
		}
	}
}

// retryAfter is the Retry-After header's value for d: whole seconds, rounded up.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}
