# Reads the table's JSON lines (slurped): how many rows are within 15%, and
# per (rate, model) whether the measured order of the four plans is the
# predicted one; a pair that flips is named with its predicted gap and
# whether the two plans' runs overlap (some run of each between runs of the
# other: the medians' order is then within the runs' spread) or lie apart.
def within: (.measured_over_predicted - 1 | fabs) <= 0.15;
def runs_overlap($a; $b):
  ($a.measured_runs_ms // [$a.measured_ms]) as $x | ($b.measured_runs_ms // [$b.measured_ms]) as $y
  | ($x | max) >= ($y | min) and ($y | max) >= ($x | min);
(map(select(within)) | length) as $ok
| "within 15%: \($ok) of \(length)",
  (group_by([.rate, .model])[]
   | . as $g
   | [range(0; length) as $i | range($i + 1; length) as $j | [$g[$i], $g[$j]]
      | select((.[0].predicted_ms - .[1].predicted_ms) * (.[0].measured_ms - .[1].measured_ms) < 0)
      | "\(.[0].plan)/\(.[1].plan) (predicted \((((.[0].predicted_ms - .[1].predicted_ms) | fabs) / ([.[0].predicted_ms, .[1].predicted_ms] | min) * 1000 | round) / 10)% apart, runs \(if runs_overlap(.[0]; .[1]) then "overlap" else "apart" end))"] as $flips
   | "\($g[0].rate) \($g[0].model): ranking " + (if ($flips | length) == 0 then "holds" else "flips " + ($flips | join(", ")) end))
