// Writes Go's own answers to time.ParseDuration, one JSON object per line,
// for the cases vocabulary/tests/go_durations.rs holds the Rust parser to.
// Regenerate with: go run vocabulary/tests/go/main.go > vocabulary/tests/go_durations.jsonl
package main

import (
	"encoding/json"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"time"
)

type answer struct {
	In    string `json:"in"`
	Nanos *int64 `json:"nanos,omitempty"`
	Error string `json:"error,omitempty"`
}

func main() {
	cases := []string{
		"", "0", "+0", "-0", "00", "0s", "30s", "1h30m", "1.5h", "720h", "300ms", "1m0.5s",
		".5s", "5.s", ".s", "-.s", "1", "h", "s1", "5d", "1h 5m", " 1s", "1s ", "-1s", "+1s",
		"--1s", "1..5s", "1.5.5s", "1us", "1µs", "1μs", "1ns", "1e3s", "1H", "1Ms",
		"2562047h47m16.854775807s", "2562047h47m16.854775808s", "-2562047h47m16.854775808s",
		"9223372036854775807ns", "9223372036854775808ns", "-9223372036854775808ns",
		"9223372036854775808ns9223372036854775808ns", "92233720368547758070ns",
		"0.000000001s", "0.0000000001s", "0.9999999999h", "1.00000000000000000000000001h",
		"0.1234567890123456789012345678901234567890h", "3000000h", "2562048h", "Never",
	}
	rng := rand.New(rand.NewSource(1))
	alphabet := []string{"0", "1", "5", "9", ".", "+", "-", "h", "m", "s", "n", "u", "µ", "μ", " "}
	for i := 0; i < 1500; i++ {
		var b strings.Builder
		for n := rng.Intn(10); n >= 0; n-- {
			b.WriteString(alphabet[rng.Intn(len(alphabet))])
		}
		cases = append(cases, b.String())
	}
	units := []string{"ns", "us", "µs", "ms", "s", "m", "h"}
	for i := 0; i < 1500; i++ {
		var b strings.Builder
		if rng.Intn(4) == 0 {
			b.WriteString("-")
		}
		for n := rng.Intn(3); n >= 0; n-- {
			b.WriteString(strconv.FormatInt(rng.Int63n(1<<uint(rng.Intn(44)+1)), 10))
			if rng.Intn(2) == 0 {
				b.WriteString(".")
				b.WriteString(strconv.FormatInt(rng.Int63n(1<<uint(rng.Intn(62)+1)), 10))
			}
			b.WriteString(units[rng.Intn(len(units))])
		}
		cases = append(cases, b.String())
	}
	out := json.NewEncoder(os.Stdout)
	for _, c := range cases {
		a := answer{In: c}
		if d, err := time.ParseDuration(c); err != nil {
			a.Error = err.Error()
		} else {
			n := int64(d)
			a.Nanos = &n
		}
		if err := out.Encode(a); err != nil {
			panic(err)
		}
	}
}
