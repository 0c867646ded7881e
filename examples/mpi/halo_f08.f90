! halo_f08.f90 -- 1-D periodic halo exchange with the mpi_f08 module.
! usage: halo_f08 [N=64] [ITERS=3]      (N double precision values)
! Per iteration each rank sends 8*N bytes to its right neighbour (MPI_Sendrecv) and one
! MPI_Allreduce of N doubles:  T[r][(r+1)%p] += 8*N*ITERS (p2p).
! The shim counts it under both MPIs: it wraps the mpi_x_f08_ routines that call PMPI_ directly
! (all of Open MPI's, MPICH's without a buffer) and MPICH's buffer routines reach its C wrappers.
program halo_f08
  use mpi_f08
  implicit none
  integer :: rank, nprocs, n, iters, it
  character(len=32) :: arg
  double precision, allocatable :: a(:), b(:)
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs)
  n = 64
  iters = 3
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) n
  end if
  if (command_argument_count() >= 2) then
    call get_command_argument(2, arg)
    read (arg, *) iters
  end if
  allocate(a(n), b(n))
  a = rank
  do it = 1, iters
    call MPI_Sendrecv(a, n, MPI_DOUBLE_PRECISION, mod(rank + 1, nprocs), 0, b, n, &
                      MPI_DOUBLE_PRECISION, mod(rank - 1 + nprocs, nprocs), 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
    call MPI_Allreduce(a, b, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
  end do
  if (rank == 0) print '(a,i0,a)', 'halo_f08: ', nprocs, ' ranks'
  call MPI_Finalize()
end program halo_f08
