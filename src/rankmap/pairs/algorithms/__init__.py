"""The message patterns of the collective algorithms, each written once.

Open MPI's and MPICH's mirrors and the model build their collectives from these. Every function
sends through an :class:`~rankmap.pairs.call.Emitter` for one rank ``r`` of a communicator of
``p`` ranks, in that communicator's ranks; sizes are element counts with an element size
``tsize`` (a library that counts bytes passes ``tsize=1``), so one pattern serves a library that
splits a vector by elements and one that splits it by bytes. Where the two libraries' versions of
a pattern differ, the difference is a parameter, named after what it changes.

* :mod:`.binomial` -- the binomial tree both libraries use (lowest set bit to the parent): bcast,
  scatter, gather and reduce walks, and the scatter phase of a scatter-allgather bcast;
* :mod:`.doubling` -- recursive doubling and halving: allreduce, allgather(v) and reduce-scatter
  with the fix-ups of sizes that are not a power of two, and the dissemination barrier;
* :mod:`.ring`, :mod:`.bruck`, :mod:`.pairwise`, :mod:`.linear` -- the rings, Bruck's
  concatenations, the pairwise exchanges and the direct (linear) sends;
* :mod:`.scatter_allgather` -- the large-message bcast: binomial scatter, then a ring or
  recursive-doubling allgather of the pieces;
* :mod:`.trees` -- the other trees of Open MPI's ``coll_base_topo.c`` (n-ary, chain, k-nomial,
  in-order binary), which only its segmented algorithms walk.

Patterns one library alone uses in one algorithm stay with that library's mirror.
"""
