# Reads the table's JSON lines (slurped): how many rows are within 15%, and
# per (rate, model) whether the measured order of the four plans is the
# predicted one; a pair that flips is named with its predicted gap.
def within: (.measured_over_predicted - 1 | fabs) <= 0.15;
(map(select(within)) | length) as $ok
| "within 15%: \($ok) of \(length)",
  (group_by([.rate, .model])[]
   | . as $g
   | [range(0; length) as $i | range($i + 1; length) as $j | [$g[$i], $g[$j]]
      | select((.[0].predicted_ms - .[1].predicted_ms) * (.[0].measured_ms - .[1].measured_ms) < 0)
      | "\(.[0].plan)/\(.[1].plan) (predicted \((((.[0].predicted_ms - .[1].predicted_ms) | fabs) / ([.[0].predicted_ms, .[1].predicted_ms] | min) * 1000 | round) / 10)% apart)"] as $flips
   | "\($g[0].rate) \($g[0].model): ranking " + (if ($flips | length) == 0 then "holds" else "flips " + ($flips | join(", ")) end))
