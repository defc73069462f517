# Chart for bench/run.sh, called by bench/lib/report.py as
#   gnuplot -e "files='a.dat b.dat ...'; out='x.png'" bench/plot.gp
# Each data file is one panel: line 1 is "# title", line 2 the column names
# (the first is the row label), then one row per workload.  Missing values
# are NaN.  Each contender keeps its colour in every panel.

if (!exists("files")) files = ''
if (!exists("out")) out = 'bench.png'
n = words(files)
set terminal pngcairo size 1400, 430 * n font ",10" noenhanced
set output out
set datafile missing "NaN"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set key top right horizontal reverse Left samplen 2 width 1
set xtics rotate by -15 scale 0
set yrange [0:*]
set bmargin 5

colour(name) = \
    name eq "direct" ? 0x888888 : \
    name eq "akgateway" ? 0x1b9e77 : \
    name eq "akgw-ws" ? 0x1b9e77 : \
    name eq "akgw-wss" ? 0x66c2a5 : \
    name eq "nginx" ? 0x7570b3 : \
    name eq "HAProxy" ? 0xd95f02 : \
    name eq "ssh-R" ? 0xe7298a : 0x000000

set multiplot layout n, 1
do for [i = 1:n] {
    f = word(files, i)
    t = system("sed -n '1s/^# //p' " . f)
    head = system("sed -n 2p " . f)
    nc = words(head)
    rows = int(system("tail -n +3 " . f . " | grep -c ."))
    set title t
    set xrange [-0.6 : rows - 0.4]
    if (strstrt(f, "mem.dat") > 0) {
        set ylabel "KiB per connection"
        unset arrow 1
    } else {
        set ylabel "ratio (reference = 1)"
        set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lw 1.5 lc rgb "black" front
    }
    plot for [c = 2:nc] f using c:xtic(1) skip 2 title word(head, c) lc rgb colour(word(head, c))
}
unset multiplot
