// Printing what an attacker may have written (a message's payload, headers, topic, a
// downstream's error, a webhook's delivery ID) without letting it drive the operator's terminal.

package main

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// safe returns s as it is when every rune of it is printable (strconv.IsPrint: no control
// characters, no escape sequences, no bidirectional overrides, no tab or newline that would break
// a table), and Go-quoted otherwise, so that the operator sees "\x1b[2J" where a terminal would
// have cleared the screen.
func safe(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// shorten cuts s to n runes, marking the cut; safe is applied after it.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// writeSafeJSON writes v as writeJSON does, with every rune that encoding/json leaves raw and a
// terminal may act on (DEL, the C1 controls such as U+009B CSI, bidirectional and other format
// characters) written as a \u escape instead: a JSON reader decodes the same strings, and a
// terminal shown the output executes nothing. Outside its strings JSON holds ASCII only, so
// every such rune is inside a string, where \u is an escape.
func writeSafeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	if err := writeJSON(&buf, v); err != nil {
		return err
	}
	var out bytes.Buffer
	for b := buf.Bytes(); len(b) > 0; {
		r, size := utf8.DecodeRune(b)
		if r == 0x7f || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			// encoding/json escaped every control below 0x20 already; the newlines left are its
			// indentation.
			if r != '\n' {
				for _, u := range utf16.AppendRune(nil, r) {
					fmt.Fprintf(&out, `\u%04x`, u)
				}
				b = b[size:]
				continue
			}
		}
		out.Write(b[:size])
		b = b[size:]
	}
	_, err := w.Write(out.Bytes())
	return err
}
