! fcalls.F90 -- Fortran traffic with known patterns; built twice: -DF08 (use mpi_f08) and without
! (use mpi).  usage: fcalls [N=16]   (p >= 3 ranks; right = r+1, left = r-1 mod p; N doubles)
!   1 MPI_Isend r -> right 8N, MPI_Irecv, MPI_Waitall(MPI_STATUSES_IGNORE)
!   2 MPI_Send_init r -> left 16N, MPI_Recv_init, 3 x MPI_Startall + MPI_Waitall(statuses)
!   3 MPI_Send r -> right 4(r+1) integers, MPI_Mprobe(MPI_ANY_SOURCE) + MPI_Mrecv(MPI_STATUS_IGNORE)
!   4 MPI_Isend r -> left 10 integers, MPI_Improbe loop + MPI_Imrecv, MPI_Wait each
!   5 MPI_Isend 8 bytes to left and to right, MPI_Irecv from both, MPI_Waitany until done; the
!     same again (tag 6) completed by MPI_Waitsome(MPI_STATUSES_IGNORE) until MPI_UNDEFINED
!   6 MPI_Allreduce(MPI_IN_PLACE) N doubles; MPI_Ibcast N doubles + MPI_Wait; MPI_Iallgather
!     (MPI_IN_PLACE) N doubles + MPI_Wait; MPI_Alltoallv(MPI_IN_PLACE) with c(i,j) = 1+mod(i+j,3)
!     doubles between i and j (the send counts passed are zeros: in place they are not read)
!   7 on a periodic 1-D cartesian communicator: MPI_Neighbor_alltoall 3 doubles to each side,
!     MPI_Ineighbor_allgather 2 doubles + MPI_Wait
!   8 a window of 40 MPI_Irecv from left and 40 MPI_Isend (1 double each) to right, one
!     MPI_Waitall(80, MPI_STATUSES_IGNORE)
program fcalls
#ifdef F08
  use mpi_f08
  implicit none
  type(MPI_Request) :: rq(4), pr(2), wq(80)
  type(MPI_Message) :: msg
  type(MPI_Status) :: st, sts(2)
  type(MPI_Comm) :: cart
#else
  use mpi
  implicit none
  integer :: rq(4), pr(2), msg, cart, wq(80)
  integer :: st(MPI_STATUS_SIZE), sts(MPI_STATUS_SIZE, 2)
#endif
  integer :: ierr, r, p, n, right, left, it, k, cnt, idx, j, off, outcount, indices(4)
  logical :: flag
  character(len=32) :: arg
  double precision, allocatable :: a(:), b(:), c(:)
  double precision :: wa(40), wb(40)
  integer :: ia(64), ib(64), zeros(64), counts(64), displs(64)
  integer, parameter :: one = 1

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, r, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, p, ierr)
  n = 16
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) n
  end if
  allocate(a(4 * n + 64), b(4 * n + 64), c(4 * n + 64))
  a = r
  right = mod(r + 1, p)
  left = mod(r - 1 + p, p)
  ia = r
  zeros = 0

  ! 1 ring
  call MPI_Irecv(b, n, MPI_DOUBLE_PRECISION, left, 1, MPI_COMM_WORLD, rq(1), ierr)
  call MPI_Isend(a, n, MPI_DOUBLE_PRECISION, right, 1, MPI_COMM_WORLD, rq(2), ierr)
  call MPI_Waitall(2, rq, MPI_STATUSES_IGNORE, ierr)

  ! 2 persistent
  call MPI_Send_init(a, 2 * n, MPI_DOUBLE_PRECISION, left, 2, MPI_COMM_WORLD, pr(1), ierr)
  call MPI_Recv_init(b, 2 * n, MPI_DOUBLE_PRECISION, right, 2, MPI_COMM_WORLD, pr(2), ierr)
  do it = 1, 3
    call MPI_Startall(2, pr, ierr)
    call MPI_Waitall(2, pr, sts, ierr)
  end do
  call MPI_Request_free(pr(1), ierr)
  call MPI_Request_free(pr(2), ierr)

  ! 3 matched probe
  call MPI_Send(ia, 4 * (r + 1), MPI_INTEGER, right, 3, MPI_COMM_WORLD, ierr)
  call MPI_Mprobe(MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, msg, st, ierr)
  call MPI_Get_count(st, MPI_INTEGER, cnt, ierr)
  call MPI_Mrecv(ib, cnt, MPI_INTEGER, msg, MPI_STATUS_IGNORE, ierr)

  ! 4 nonblocking matched probe
  call MPI_Isend(ia, 10, MPI_INTEGER, left, 4, MPI_COMM_WORLD, rq(1), ierr)
  flag = .false.
  do while (.not. flag)
    call MPI_Improbe(right, 4, MPI_COMM_WORLD, flag, msg, MPI_STATUS_IGNORE, ierr)
  end do
  call MPI_Imrecv(ib, 10, MPI_INTEGER, msg, rq(2), ierr)
  call MPI_Wait(rq(2), st, ierr)
  call MPI_Wait(rq(1), MPI_STATUS_IGNORE, ierr)

  ! 5 waitany (Fortran indices are 1-based)
  call MPI_Irecv(b, 1, MPI_DOUBLE_PRECISION, left, 5, MPI_COMM_WORLD, rq(1), ierr)
  call MPI_Irecv(c, 1, MPI_DOUBLE_PRECISION, right, 5, MPI_COMM_WORLD, rq(2), ierr)
  call MPI_Isend(a, 1, MPI_DOUBLE_PRECISION, left, 5, MPI_COMM_WORLD, rq(3), ierr)
  call MPI_Isend(a, 1, MPI_DOUBLE_PRECISION, right, 5, MPI_COMM_WORLD, rq(4), ierr)
  do k = 1, 4
    call MPI_Waitany(4, rq, idx, MPI_STATUS_IGNORE, ierr)
  end do
  call MPI_Irecv(b, 1, MPI_DOUBLE_PRECISION, left, 6, MPI_COMM_WORLD, rq(1), ierr)
  call MPI_Irecv(c, 1, MPI_DOUBLE_PRECISION, right, 6, MPI_COMM_WORLD, rq(2), ierr)
  call MPI_Isend(a, 1, MPI_DOUBLE_PRECISION, left, 6, MPI_COMM_WORLD, rq(3), ierr)
  call MPI_Isend(a, 1, MPI_DOUBLE_PRECISION, right, 6, MPI_COMM_WORLD, rq(4), ierr)
  outcount = 0
  do while (outcount /= MPI_UNDEFINED)
    call MPI_Waitsome(4, rq, outcount, indices, MPI_STATUSES_IGNORE, ierr)
  end do
  call MPI_Barrier(MPI_COMM_WORLD, ierr)

  ! 6 collectives, with MPI_IN_PLACE
  b(1:n) = 1
  call MPI_Allreduce(MPI_IN_PLACE, b, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  call MPI_Ibcast(a, n, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, rq(1), ierr)
  call MPI_Wait(rq(1), MPI_STATUS_IGNORE, ierr)
  call MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c, n, MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, rq(1), ierr)
  call MPI_Wait(rq(1), MPI_STATUS_IGNORE, ierr)
  off = 0
  do j = 1, p
    counts(j) = 1 + mod(r + j - 1, 3)
    displs(j) = off
    off = off + counts(j)
  end do
  call MPI_Alltoallv(MPI_IN_PLACE, zeros, zeros, MPI_DATATYPE_NULL, c, counts, displs, &
                     MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, ierr)

  ! 7 neighbourhood collectives on a ring
  call MPI_Cart_create(MPI_COMM_WORLD, 1, (/ p /), (/ .true. /), .false., cart, ierr)
  call MPI_Neighbor_alltoall(a, 3, MPI_DOUBLE_PRECISION, b, 3, MPI_DOUBLE_PRECISION, cart, ierr)
  call MPI_Ineighbor_allgather(a, 2, MPI_DOUBLE_PRECISION, b, 2, MPI_DOUBLE_PRECISION, cart, rq(1), ierr)
  call MPI_Wait(rq(1), MPI_STATUS_IGNORE, ierr)
  call MPI_Comm_free(cart, ierr)

  ! 8 a window of 80 requests in one MPI_Waitall
  wa = 1
  do k = 1, 40
    call MPI_Irecv(wb(k), 1, MPI_DOUBLE_PRECISION, left, 100 + k, MPI_COMM_WORLD, wq(k), ierr)
  end do
  do k = 1, 40
    call MPI_Isend(wa(k), 1, MPI_DOUBLE_PRECISION, right, 100 + k, MPI_COMM_WORLD, wq(40 + k), ierr)
  end do
  call MPI_Waitall(80, wq, MPI_STATUSES_IGNORE, ierr)

  if (r == 0) print '(a,i0,a)', 'fcalls: ', p, ' ranks'
  call MPI_Finalize(ierr)
end program fcalls
