// Command keychoice counts, for the macro benchmark's workload, how many objects and namespace reports each
// member of a sharded audit would own with the KEP-5866 hash of the namespace (celaudit's key, split by
// shard.Layout as celaudit splits it) and with the hash of the UID, for 2, 3 and 4 members, and prints a
// markdown table with the imbalance (max/mean).
//
//	go run ./test/bench/keychoice -objects 1000000 -namespaces 1000 -skew 0.3
//
// The objects follow the macro benchmark's plan (object i in namespace i mod namespaces, bench-NNN; with
// -names random, random names instead). With
// -skew f, a fraction f of the objects is moved into the first namespace (a "giant namespace"). UIDs are
// random version 4 UUIDs from a fixed seed, as the API server assigns random ones.
package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"github.com/celaudit/celaudit/internal/shard"
)

func main() {
	objects := flag.Int("objects", 1000000, "Objects of the workload.")
	namespaces := flag.Int("namespaces", 1000, "Namespaces the objects are spread over.")
	skews := flag.String("skew", "0,0.3", "Comma-separated fractions of the objects in one giant namespace (0: none).")
	members := flag.String("members", "2,3,4", "Comma-separated member counts.")
	stripes := flag.Int("stripes", 0, "Ranges per member for the namespace key (shard.Layout's Stripes): member i of m owns the ranges j of m·stripes with j mod m = i; 0 is celaudit's default (shard.DefaultStripes), 1 one contiguous range each.")
	names := flag.String("names", "bench", "Namespace names: bench (the benchmark's bench-NNN) or random (ns- and 8 random hex digits).")
	flag.Parse()
	var ms []int
	for _, f := range strings.Split(*members, ",") {
		var m int
		if _, err := fmt.Sscan(f, &m); err != nil || m < 1 {
			fmt.Fprintf(os.Stderr, "keychoice: bad member count %q\n", f)
			os.Exit(2)
		}
		ms = append(ms, m)
	}
	fmt.Printf("`go run ./test/bench/keychoice %s`\n\n", strings.Join(os.Args[1:], " "))
	fmt.Println("| workload | key | members | objects per member | max/mean | namespaces (reports) per member |")
	fmt.Println("| --- | --- | --- | --- | --- | --- |")
	for _, f := range strings.Split(*skews, ",") {
		var skew float64
		if _, err := fmt.Sscan(f, &skew); err != nil || skew < 0 || skew >= 1 {
			fmt.Fprintf(os.Stderr, "keychoice: bad skew %q\n", f)
			os.Exit(2)
		}
		w := newWorkload(*objects, *names, nsNames(*names, *namespaces), skew)
		for _, m := range ms {
			w.row(os.Stdout, m, *stripes)
		}
	}
}

// workload is the namespaces of the objects and their UIDs' hashes.
type workload struct {
	name string
	// perNamespace counts the objects of each namespace.
	perNamespace map[string]int
	uidHashes    []uint64
}

// nsNames returns n namespace names of the given style.
func nsNames(style string, n int) []string {
	out := make([]string, n)
	rng := rand.New(rand.NewPCG(5866, 25))
	for i := range out {
		switch style {
		case "random":
			out[i] = fmt.Sprintf("ns-%08x", rng.Uint32())
		case "bench":
			out[i] = fmt.Sprintf("bench-%03d", i)
		default:
			fmt.Fprintf(os.Stderr, "keychoice: unknown -names %q\n", style)
			os.Exit(2)
		}
	}
	return out
}

func newWorkload(objects int, style string, namespaces []string, skew float64) workload {
	w := workload{perNamespace: map[string]int{}, uidHashes: make([]uint64, 0, objects)}
	giant := int(skew * float64(objects))
	w.name = fmt.Sprintf("%d objects, %d %s namespaces", objects, len(namespaces), style)
	if giant > 0 {
		w.name += fmt.Sprintf(", %.0f%% in %s", skew*100, namespaces[0])
	}
	rng := rand.New(rand.NewPCG(25, 5866))
	for i := range objects {
		ns := namespaces[i%len(namespaces)]
		if i < giant {
			ns = namespaces[0]
		}
		w.perNamespace[ns]++
		w.uidHashes = append(w.uidHashes, shard.Hash(uuid(rng)))
	}
	return w
}

// uuid returns a random version 4 UUID in its textual form.
func uuid(rng *rand.Rand) string {
	var b [16]byte
	for i := range 2 {
		v := rng.Uint64()
		for j := range 8 {
			b[i*8+j] = byte(v >> (8 * j))
		}
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// row prints the namespace-key and UID-key rows of m members. The namespace key is split as celaudit
// splits it (shard.Layout, with stripes ranges per member); the UID key, which celaudit does not use, into
// one contiguous range per member.
func (w workload) row(out io.Writer, m, stripes int) {
	byNS, nsCount, byUID := make([]int, m), make([]int, m), make([]int, m)
	layouts := make([]shard.Layout, m)
	for i := range layouts {
		layouts[i] = shard.Layout{Index: i, Count: m, Stripes: stripes}
	}
	for ns, n := range w.perNamespace {
		i := slices.IndexFunc(layouts, func(l shard.Layout) bool { return l.OwnsNamespace(ns) })
		byNS[i] += n
		nsCount[i]++
	}
	for _, h := range w.uidHashes {
		byUID[owner(h, m)]++
	}
	key := fmt.Sprintf("namespace, %d ranges per member", layouts[0].RangesPerMember())
	if layouts[0].RangesPerMember() == 1 {
		key = "namespace, one contiguous range per member"
	}
	fmt.Fprintf(out, "| %s | %s | %d | %s | %.2f | %s |\n", w.name, key, m, ints(byNS), imbalance(byNS), ints(nsCount))
	// By UID every member holds results of every namespace that has at least m objects.
	fmt.Fprintf(out, "| %s | UID | %d | %s | %.2f | every namespace on every member |\n", w.name, m, ints(byUID), imbalance(byUID))
}

// owner returns the member of m whose range holds h.
func owner(h uint64, m int) int {
	for i := range m {
		if shard.RangeOf(i, m).Contains(h) {
			return i
		}
	}
	panic("the ranges cover the hash space")
}

func imbalance(counts []int) float64 {
	total, most := 0, 0
	for _, c := range counts {
		total += c
		most = max(most, c)
	}
	return float64(most) / (float64(total) / float64(len(counts)))
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, " / ")
}
