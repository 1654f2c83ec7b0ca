package activity

import "github.com/tempotent/tempotent/operator"

// operatorFor is an operator client on s's receipts, for the internal tests that partition,
// purge or count them as an operator would.
func operatorFor(s *Store) *operator.Client {
	op, err := operator.NewClient(s.db, operator.Config{Schema: s.cfg.Schema, Retention: s.cfg.Retention})
	if err != nil {
		panic(err)
	}
	return op
}
