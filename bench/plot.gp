# Chart for bench/run.sh, called by bench/lib/report.py as
#   gnuplot -e "files='a.dat b.dat ...'; out='x.png'" bench/plot.gp
# Each data file is one panel: line 1 is "# title", line 2 the column names
# (the first is the row label), then one row per workload.

if (!exists("files")) files = ''
if (!exists("out")) out = 'bench.png'
n = words(files)
set terminal pngcairo size 1400, 420 * n font ",10" noenhanced
set output out
set datafile missing "NaN"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set key top right horizontal
set xtics rotate by -20 scale 0
set yrange [0:*]
set multiplot layout n, 1
do for [i = 1:n] {
    f = word(files, i)
    t = system("sed -n '1s/^# //p' " . f)
    nc = int(system("sed -n 2p " . f . " | awk '{ print NF }'"))
    set title t
    if (strstrt(f, "mem.dat") > 0) {
        set ylabel "KiB per connection"
        unset arrow
    } else {
        set ylabel "ratio (reference = 1)"
        set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lw 1.5 lc rgb "black" front
    }
    plot for [c = 2:nc] f using c:xtic(1) skip 1 title word(system("sed -n 2p " . f), c)
}
unset multiplot
