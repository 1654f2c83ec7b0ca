#!/usr/bin/awk -f
# Reads `go test -bench` output whose sub-benchmarks are named bare=NAME and tempotent=NAME
# within one benchmark, and prints, per benchmark, the median time of each side, the ratio
# tempotent/bare, and round trips per op.
/^Benchmark/ {
	split($1, parts, "/")
	group = parts[1]; sub(/^Benchmark/, "", group)
	side = parts[2]; sub(/-[0-9]+$/, "", side)
	split(side, kv, "=")
	role = kv[1]
	ns[group, role] = ns[group, role] " " $3
	for (i = 4; i < NF; i++) if ($(i+1) == "roundtrips/op") rt[group, role] = $i
	name[group, role] = kv[2]
	if (!(group in seen)) { seen[group] = 1; order[++n] = group }
}
function median(list,   a, k, m, i, j, t) {
	k = split(list, a, " ")
	for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
}
END {
	printf "\n%-16s %-12s %12s %-10s %12s %8s %14s\n", "operation", "bare", "bare µs", "tempotent", "tempotent µs", "ratio", "round trips"
	for (g = 1; g <= n; g++) {
		grp = order[g]
		b = median(ns[grp, "bare"]); w = median(ns[grp, "tempotent"])
		printf "%-16s %-12s %12.1f %-10s %12.1f %7.2fx %6s vs %-4s\n", grp, name[grp, "bare"], b / 1000, name[grp, "tempotent"], w / 1000, w / b, rt[grp, "tempotent"], rt[grp, "bare"]
	}
}
