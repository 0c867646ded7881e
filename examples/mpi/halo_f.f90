! halo_f.f90 -- 1-D periodic halo exchange in Fortran (use mpi).
! usage: halo_f [N=128] [ITERS=4]      (N double precision values per face)
! Per iteration each rank sends 8*N bytes to its right neighbour with MPI_SENDRECV and
! 16*N bytes (2N values) to its left neighbour with MPI_ISEND/MPI_IRECV/MPI_WAITALL,
! then one MPI_ALLREDUCE of one double (8 bytes):
!   T[r][(r+1)%p] += 8*N*ITERS (MPI_Sendrecv), T[r][(r-1+p)%p] += 16*N*ITERS (MPI_Isend).
program halo_f
  use mpi
  implicit none
  integer :: ierr, rank, nprocs, left, right, n, iters, it, reqs(2)
  integer :: stat(MPI_STATUS_SIZE)
  character(len=32) :: arg
  double precision, allocatable :: sendbuf(:), recvbuf(:), big_s(:), big_r(:)
  double precision :: x, y

  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, nprocs, ierr)
  n = 128
  iters = 4
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) n
  end if
  if (command_argument_count() >= 2) then
    call get_command_argument(2, arg)
    read (arg, *) iters
  end if
  allocate(sendbuf(n), recvbuf(n), big_s(2*n), big_r(2*n))
  sendbuf = rank
  big_s = rank
  right = mod(rank + 1, nprocs)
  left = mod(rank - 1 + nprocs, nprocs)
  do it = 1, iters
    call MPI_SENDRECV(sendbuf, n, MPI_DOUBLE_PRECISION, right, 1, recvbuf, n, &
                      MPI_DOUBLE_PRECISION, left, 1, MPI_COMM_WORLD, stat, ierr)
    call MPI_IRECV(big_r, 2*n, MPI_DOUBLE_PRECISION, right, 2, MPI_COMM_WORLD, reqs(1), ierr)
    call MPI_ISEND(big_s, 2*n, MPI_DOUBLE_PRECISION, left, 2, MPI_COMM_WORLD, reqs(2), ierr)
    call MPI_WAITALL(2, reqs, MPI_STATUSES_IGNORE, ierr)
    x = rank
    call MPI_ALLREDUCE(x, y, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  end do
  if (rank == 0) print '(a,i0,a)', 'halo_f: ', nprocs, ' ranks'
  call MPI_FINALIZE(ierr)
end program halo_f
