package limiter

import (
	"context"
	"fmt"
	"time"
)

// Take is one rule's part of a request: n units of key under Limit.
type Take struct {
	// Key is the rule's limiter key for the request.
	Key string
	// Limit is the rule's limit.
	Limit Limit
	// N is the request's cost under the rule, at least 1.
	N int64
	// Shadow marks a rule that is evaluated and charged but never denies: the request's
	// admission does not depend on its decision.
	Shadow bool
	// Check marks a take that is decided but never charged: a denial denies the request (unless
	// Shadow), but an admitted request leaves the key's state as it was. A countWhen rule
	// checks at admission and charges (Charger) after the response.
	Check bool
	// Holder names the holding of a Concurrency take (a number its front end never reuses
	// while the process runs): a shared store keeps the slot under it until released
	// (SlotStore.Release) or expired. Other algorithms ignore it.
	Holder int64
}

// RequestStore decides all the takes of one request as one unit, so that a rule that denies a
// request does not make the other rules spend quota on it.
//
// TakeRequest decides every take at now and writes take i's decision to res[i] (res must be at
// least as long as takes): the decision take i gets on the state its key is in, as if it alone
// were decided, where a key repeated within the request sees the earlier takes on it as already
// charged. The request is admitted iff every take that is not Shadow is Allowed, and only then
// is anything charged: every Allowed take, Shadow ones included, and every state brought
// forward to now. A denied request charges nothing and leaves every state as it was; its
// Allowed takes report the Remaining they would have left. With no takes the request is
// admitted.
//
// An invalid Limit, a cost below 1 or an instant out of range gives an error (as for
// Store.Take), with nothing decided or charged. Implementations are safe for concurrent use;
// each documents how atomic the unit is.
type RequestStore interface {
	TakeRequest(ctx context.Context, takes []Take, now time.Time, res []Result) (admitted bool, err error)
}

// ValidateRequest checks what every RequestStore checks before deciding anything: res is long
// enough, each cost is at least 1 and each Limit is valid. The errors wrap ErrInvalidLimit
// (but for a short res, a programming error).
func ValidateRequest(takes []Take, res []Result) error {
	if len(res) < len(takes) {
		return fmt.Errorf("limiter: %d results for %d takes", len(res), len(takes))
	}
	for i := range takes {
		if takes[i].N < 1 {
			return fmt.Errorf("%w: take %d: cost %d is below 1", ErrInvalidLimit, i, takes[i].N)
		}
		if err := takes[i].Limit.Validate(); err != nil {
			return fmt.Errorf("%w: take %d: %w", ErrInvalidLimit, i, err)
		}
	}
	return nil
}

// Admitted reports whether a request whose takes got res is admitted: every take that is not
// Shadow is Allowed.
func Admitted(takes []Take, res []Result) bool {
	for i := range takes {
		if !takes[i].Shadow && !res[i].Allowed {
			return false
		}
	}
	return true
}
