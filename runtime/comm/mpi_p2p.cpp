// Point-to-point tensors of the MPI transport: the wire format, SendOp and
// RecvOp.

// C API only: Open MPI's mpi.h would otherwise drag in the C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstring>

#include "runtime/comm/mpi_p2p.h"
#include "runtime/comm/mpi_engine.h"
#include "core/error.h"
#include "core/text.h"

namespace pd {
namespace {

// `meta`) on the sender's (peer, tag). A small tensor rides in the same
// message, after the header (one message, one match, one completion); a
// larger one follows as a second message, so the receiver can check the
// shape or allocate before the data lands where it belongs.
constexpr int32_t kHeaderMagic = 0x32544450;  // "PDT2"
constexpr int kMaxDims = 8;
constexpr int32_t kPayloadInline = 1;
struct WireHeader {
  int32_t magic = kHeaderMagic;
  int32_t dtype = 0;
  int32_t ndim = 0;
  int32_t flags = 0;  // kPayloadInline
  int64_t dims[kMaxDims] = {};
  int64_t meta = 0;
};
// Header plus inline payload stays within Open MPI's shared-memory eager
// size (4 KiB with its own header), so a small tensor costs one copy in
// and one out, no rendezvous.
constexpr int kInlineBytes = 4096 - 256;
struct WireMessage {
  WireHeader header;
  char payload[kInlineBytes];
};

void fill_header(WireHeader& h, const Tensor& t, int64_t meta) {
  PD_CHECK(t.ndim() <= kMaxDims, "tensors of more than ", kMaxDims, " dims cannot be sent");
  h.dtype = static_cast<int32_t>(t.dtype());
  h.ndim = t.ndim();
  for (int i = 0; i < t.ndim(); ++i) h.dims[i] = t.shape()[i];
  h.meta = meta;
}

class SendOp final : public MpiOp {
 public:
  SendOp(MpiEngine& e, Tensor t, int peer, int tag, int64_t meta)
      : MpiOp(e, cat("send tag ", tag, " ", shape_str(t.shape()), " ", dtype_name(t.dtype()),
                     " to rank ", peer)),
        t_(t.device().is_cpu() ? t : t.to(Device::cpu())),  // host staging
        peer_(peer),
        tag_(tag) {
    bytes_ = checked_count(t_.nbytes(), "message");
    wire_ = std::make_unique<WireMessage>();
    fill_header(wire_->header, t_, meta);
    if (bytes_ <= kInlineBytes) {
      wire_->header.flags = kPayloadInline;
      if (bytes_ > 0) std::memcpy(wire_->payload, t_.raw(), static_cast<size_t>(bytes_));
      t_ = Tensor{};  // copied: the caller may reuse its tensor at once
    }
    waiting_peer_ = peer;
  }
  void start() override {
    MPI_Request r;
    const bool inline_payload = wire_->header.flags & kPayloadInline;
    const int head = static_cast<int>(sizeof(WireHeader)) + (inline_payload ? bytes_ : 0);
    PD_MPI_CHECK_FOR(what_, MPI_Isend(wire_.get(), head, MPI_BYTE, peer_, tag_, eng_.p2p_, &r));
    track(r, peer_, false);
    if (!inline_payload) {
      PD_MPI_CHECK_FOR(what_, MPI_Isend(t_.raw(), bytes_, MPI_BYTE, peer_, tag_, eng_.p2p_, &r));
      track(r, peer_, false);
    }
  }
  void on_request_done(int, const MPI_Status&) override {
    if (outstanding_ == 0) succeed();
  }

 private:
  Tensor t_;
  std::unique_ptr<WireMessage> wire_;
  int peer_, tag_, bytes_ = 0;
};

class RecvOp final : public MpiOp {
 public:
  RecvOp(MpiEngine& e, Tensor into, int peer, int tag)
      : MpiOp(e, cat("receive tag ", tag, " from rank ", peer)), into_(into), peer_(peer), tag_(tag) {
    waiting_peer_ = peer;
  }
  void start() override {
    auto self = std::static_pointer_cast<RecvOp>(shared_from_this());
    eng_.acquire_channel(peer_, tag_, [self] {
      self->holds_channel_ = true;
      try {
        MPI_Request r;
        self->wire_ = std::make_unique<WireMessage>();
        PD_MPI_CHECK_FOR(self->what_, MPI_Irecv(self->wire_.get(), sizeof(WireMessage), MPI_BYTE, self->peer_,
                                                self->tag_, self->eng_.p2p_, &r));
        self->track(r, self->peer_, true);
      } catch (const std::exception& e) {
        self->fail(e.what());
      }
    });
  }
  void on_finished() override { release(); }
  void on_request_done(int slot, const MPI_Status& st) override {
    if (slot == 0) {
      on_header(st);
    } else if (outstanding_ == 0) {
      finish_recv();
    }
  }
  void finish_recv() {
    if (!mismatch_.empty()) return fail(mismatch_);
    if (into_.defined() && !into_.device().is_cpu()) into_.copy_from(host_);
    succeed();
  }
  Tensor tensor() const override { return into_.defined() ? into_ : host_; }
  int64_t meta() const override { return header_.meta; }

 private:
  void on_header(const MPI_Status& st) {
    int received = 0;
    PD_MPI_CHECK_FOR(what_, MPI_Get_count(&st, MPI_BYTE, &received));
    if (received >= static_cast<int>(sizeof(WireHeader))) header_ = wire_->header;
    if (received < static_cast<int>(sizeof(WireHeader)) || header_.magic != kHeaderMagic || header_.ndim < 0 ||
        header_.ndim > kMaxDims || header_.dtype < 0 || header_.dtype > static_cast<int>(DType::I64)) {
      fail(cat("rank ", eng_.rank_, ": ", what_, ": malformed message header (a different program or "
               "version on the other side?)"));
      return;
    }
    Shape shape(header_.dims, header_.dims + header_.ndim);
    auto dtype = static_cast<DType>(header_.dtype);
    if (into_.defined()) {
      if (into_.shape() != shape || into_.dtype() != dtype) {
        // Still take the payload (into a throw-away buffer) so the next
        // message on this tag is read as a header, then report.
        mismatch_ = cat("rank ", eng_.rank_, ": ", what_, ": expected ", shape_str(into_.shape()), " ",
                        dtype_name(into_.dtype()), " but rank ", peer_, " sent ", shape_str(shape), " ",
                        dtype_name(dtype));
        host_ = Tensor::empty(shape, dtype);
      } else {
        host_ = into_.device().is_cpu() ? into_ : Tensor::empty(shape, dtype);
      }
    } else {
      host_ = Tensor::empty(shape, dtype);
    }
    const int bytes = checked_count(host_.nbytes(), "message");
    if (header_.flags & kPayloadInline) {
      release();
      if (received != static_cast<int>(sizeof(WireHeader)) + bytes) {
        fail(cat("rank ", eng_.rank_, ": ", what_, ": message of ", received, " bytes for a ", shape_str(shape), " ",
                 dtype_name(dtype), " tensor (a different program or version on the other side?)"));
        return;
      }
      if (bytes > 0) std::memcpy(host_.raw(), wire_->payload, static_cast<size_t>(bytes));
      wire_.reset();
      finish_recv();
      return;
    }
    wire_.reset();
    if (bytes == 0) {
      finish_recv();
      return;
    }
    MPI_Request r;
    PD_MPI_CHECK_FOR(what_, MPI_Irecv(host_.raw(), bytes, MPI_BYTE, peer_, tag_, eng_.p2p_, &r));
    track(r, peer_, true);
    release();
  }
  void release() {
    if (!holds_channel_) return;
    holds_channel_ = false;
    eng_.release_channel(peer_, tag_);
  }

  bool holds_channel_ = false;
  Tensor into_, host_;
  std::unique_ptr<WireMessage> wire_;  // the first message: header, inline payload
  WireHeader header_;
  int peer_, tag_;
  std::string mismatch_;
};

}  // namespace

Request start_mpi_send(MpiEngine& engine, const Tensor& t, int peer, int tag, int64_t meta) {
  return engine.launch(std::make_shared<SendOp>(engine, t, peer, tag, meta));
}

Request start_mpi_recv(MpiEngine& engine, Tensor into, int peer, int tag) {
  return engine.launch(std::make_shared<RecvOp>(engine, std::move(into), peer, tag));
}

}  // namespace pd
