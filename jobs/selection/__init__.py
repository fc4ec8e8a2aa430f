"""View selection: which follow edges are pushed, pulled or served by a shared view.

``feeding_frenzy`` holds the per-edge and per-consumer rules of Silberstein et al. (SIGMOD
2010); ``cost`` prices any plan with the cost model of Chen & Zhou (Eq. 3-5).
"""
